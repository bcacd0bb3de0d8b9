"""`python -m app.cli`: the same entry as the `qlora-app` command (the UI and torchrun start their children so)."""

from app.cli.main import main

main()
