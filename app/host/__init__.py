"""This machine and this process: what the device can do (machine), the offline switches (offline), CPU threads
(threads) and the allocator (alloc), other processes (procs), the library versions a job needs (stack), which
addresses are this machine and the one fetch of a URL a request or a row names (net), importing the user's own code
(usercode), the process-wide settings an entry point makes once (process), and the library patches, each made
around a single model load (loading: transformers' loader hands each parameter it places to a callback, so MoE
experts are quantized as they load; the weight conversions a load applies extended with a published format's
dequantization, so MXFP4 / FP8 checkpoints load into NF4; llama.cpp opened with its plain CPU buffers where its repacked kernels fault).

Owns: every change to os.environ, the warnings filters or another library's settings
(tests/structure/test_architecture.py scans for others). Must not import anything above it, nor torch/transformers
at module level."""
