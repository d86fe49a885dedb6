"""The `wf-schedule simulate` dry-run: scenarios, run models, the virtual-clock
engine around the real `decide`, output formats and plots.

Imperative (it drives a clock) but without disk or server: the command-line
adapter (`adapters.simulate_cli`) does the reading and writing.
"""

__all__: list[str] = []
