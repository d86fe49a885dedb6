"""shell layer of wf-scheduler."""

__all__: list[str] = []
