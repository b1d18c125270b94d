"""The use cases: typed requests in, typed outcomes out; the Python API that the CLI, the app and notebooks call."""
