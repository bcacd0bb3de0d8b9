"""A distillation teacher outside the training process: a GGUF file run by llama.cpp in a child process of its own
(``gguf_server``), or any OpenAI-compatible endpoint that returns log-probabilities (llama.cpp's server, vLLM,
``qlora-app serve``). The training process talks to either over the same HTTP client (``client``): the teacher's
weights never enter its memory, and what it sends back for each position of an answer is its k most likely tokens
with their log-probabilities (``topk``: the sparse loss the student learns from), kept per prompt for off-policy runs
(``answers``).

Modules: ``gguf_server`` (the llama.cpp child and its parent-side handle), ``client`` (asking any teacher over
OpenAI's completions), ``connect`` (opening one as a run's plan recorded it), ``place`` (where it runs and what it
takes of this machine), ``topk`` (the loss), ``answers`` (the off-policy run's written answers).

Owns: starting and stopping the llama.cpp child, the client, the top-k loss and the answers file, and sizing a GGUF
teacher against this machine. Must not plan a run (app/train/planning/teacher.py decides, probes before the student
loads, and records) nor build trainers (app/train/methods/outside_teacher.py); torch is imported inside the
functions that need it, llama_cpp in the child only.
"""
