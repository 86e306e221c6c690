"""Kineto (torch.profiler) Chrome-trace JSON: `load.load_kineto`."""
