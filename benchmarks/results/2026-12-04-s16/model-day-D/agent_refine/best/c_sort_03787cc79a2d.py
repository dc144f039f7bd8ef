# cudaperf-task: c_sort_03787cc79a2d
# best of the run: sample 0, turn 1, syntax_error, reward 0.000
def sort_segments(keys, vals, nseg):
    for i in range(len(keys)):
        vv = vals[i * nseg + i]
        for j in range(nseg):
            key = keys[i][j]
            vv = vv if vv < 0.0f else float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) / float(keys[i][j]) + float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j]) * float(keys[i][j])
            keys[i][j] = key
        keys[i + nseg][j] = vv
    return keys, vals
