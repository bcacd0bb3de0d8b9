"""This machine and this process: what the device can do (machine), the offline switches (offline), CPU threads
(threads) and the allocator (alloc), other processes (procs), the library versions a job needs (stack), which
addresses are this machine (net), importing the user's own code (usercode), and the process-wide settings an entry
point makes once (process).

Owns: every change to os.environ, the warnings filters or another library's settings
(tests/structure/test_architecture.py scans for others). Must not import anything above it, nor torch/transformers
at module level."""
