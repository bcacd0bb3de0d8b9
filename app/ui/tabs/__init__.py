"""One builder per tab: each lays out its components and wires its own events."""
