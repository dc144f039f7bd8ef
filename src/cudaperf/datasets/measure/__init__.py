"""The resumable GPU measurement of every implementation of every task, and its statistics."""
