"""One builder per tab (train, runs, compare, chat): each lays out its components and wires its own events.

Owns: layout and wiring. Must not hold what the handlers (app/ui/handlers.py) decide, nor start anything but the
CLI in a subprocess (app/ui/jobs.py)."""
