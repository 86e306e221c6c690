"""What one device did: per-device totals, overlap, kernels, fusion figures, GPU memory, queue delay, GPU time by host range."""
