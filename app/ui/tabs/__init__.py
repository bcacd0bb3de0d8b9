"""One builder per tab (Train, Runs, Compare, Chat): each lays out its components and wires its own events.

Owns: layout and wiring. Must not hold what the handlers (app/ui/handlers.py) decide, nor start anything but the
CLI in a subprocess (app/ui/jobs.py)."""
