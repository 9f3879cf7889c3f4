"""What runs on a node: its agent, its ranks' start, watch and stop (process groups, the
reaper, why a rank died, an attempt's end), the ranks' entry point, their stacks and the
GPU hints fed from the node's samples. Backends and the supervisor build on it; it
imports neither, nor ``sessions`` (whose ranks it starts by command, like any rank's)."""
