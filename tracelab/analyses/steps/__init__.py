"""Training steps: inferred or marked, their GPU windows, the per-step table, the steady-state step time and the set-up before them."""
