"""Running a planned run: the one Session that opens, plans, records and closes every run.

    session.py      Session.run: open, plan, create, build, train, step down on out-of-memory, evaluate, prove, close
    build.py        loads the model as planned and builds the method's trainer (app/train/methods) with its callbacks
    callbacks.py    metrics, status, stop, counts;  heldout_eval.py: the held-out points during training
    early_stop.py   the held-out curve's best point, early stopping on it, and which adapter is the run's
    peakmem.py      peak memory;  runlog.py: train.log
    launcher.py, torchrun.py   the same run on N processes through torchrun

Owns: the run's life from request to closed folder. Must not make a plan's decisions again (app/train/planning)
nor write config.yaml / status.json itself (app/run/record.py does, for the session)."""
