"""Per-SM lanes (measured or estimated), SM time, occupancy and green-context partitions."""
