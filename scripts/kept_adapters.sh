#!/usr/bin/env bash
# Trained LoRA adapters kept in the repository's history, not in its tree: a session's checkout is a fresh
# clone of main, so ignored folders (.carry/) do not outlive it, and every tracked file travels in each
# device call's 64-MiB carry (an 18-MB adapter in the tree would crowd out the model's parts). So `keep`
# commits the adapter's archive under benchmarks/kept-adapters/, records the commit in INDEX.tsv, and
# removes the archive from the tree in a second commit; `restore` reads it back from that commit.
#   bash scripts/kept_adapters.sh keep NAME DIR [WHAT]  # DIR holds adapter_config.json; WHAT: a line on it
#   bash scripts/kept_adapters.sh restore NAME DIR   # DIR gets the adapter back (sha256 checked)
#   bash scripts/kept_adapters.sh list
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=benchmarks/kept-adapters
INDEX=$HERE/INDEX.tsv  # name, commit holding the archive, the archive's sha256, what it is

usage() { sed -n 7,9p "$0" >&2; exit 2; }
(( $# >= 1 )) || usage

keep() {
  local name=$1 dir=$2 what=${3:-} archive sha commit
  [[ -f $dir/adapter_config.json ]] || { echo "$dir holds no adapter_config.json" >&2; exit 2; }
  [[ $name =~ ^[A-Za-z0-9@._-]+$ ]] || { echo "name $name: letters, digits, @ . _ - only" >&2; exit 2; }
  if [[ -f $INDEX ]] && cut -f1 "$INDEX" | grep -qx "$name"; then
    echo "$name is kept already (see $INDEX): choose another name" >&2; exit 2
  fi
  git diff --cached --quiet || { echo "the index holds staged changes: commit them first" >&2; exit 2; }
  mkdir -p "$HERE"
  archive=$HERE/$name.tgz
  tar czf "$archive" --sort=name --mtime=@0 --owner=0 --group=0 -C "$dir" .
  sha=$(sha256sum "$archive" | cut -c1-64)
  git add "$archive"
  git commit -q -m "Kept adapter $name (in this commit's tree only; scripts/kept_adapters.sh restores it)"
  commit=$(git rev-parse HEAD)
  git rm -q "$archive"
  mkdir -p "$HERE"  # git rm takes the folder too when the archive was its only file
  printf '%s\t%s\t%s\t%s\n' "$name" "$commit" "$sha" "$what" >> "$INDEX"
  git add "$INDEX"
  git commit -q -m "Kept adapter $name: its archive leaves the tree; INDEX.tsv names the commit that holds it"
  echo "$name kept in $commit (sha256 ${sha:0:16})"
}

restore() {
  local name=$1 dir=$2 line commit sha tmp
  line=$(awk -F'\t' -v n="$name" '$1 == n' "$INDEX" 2>/dev/null) || true
  [[ -n $line ]] || { echo "no kept adapter $name in $INDEX" >&2; exit 2; }
  commit=$(cut -f2 <<< "$line") sha=$(cut -f3 <<< "$line")
  tmp=$(mktemp)
  git show "$commit:$HERE/$name.tgz" > "$tmp"
  [[ $(sha256sum "$tmp" | cut -c1-64) == "$sha" ]] || { echo "$name: sha256 differs from $INDEX" >&2; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$tmp" -C "$dir" && rm -f "$tmp"
  echo "$name restored into $dir"
}

case $1 in
  keep) (( $# >= 3 )) || usage; keep "$2" "$3" "${4:-}" ;;
  restore) (( $# == 3 )) || usage; restore "$2" "$3" ;;
  list) cat "$INDEX" 2>/dev/null || true ;;
  *) usage ;;
esac
