"""Several ranks: the cross-rank view, matched collectives, compute/communication per rank and step, and the critical path of a step."""
