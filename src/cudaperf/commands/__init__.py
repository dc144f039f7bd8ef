"""Thin CLI adapters, one module per `cudaperf` subcommand."""
