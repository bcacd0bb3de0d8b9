"""A distillation teacher outside the training process: a GGUF file run by llama.cpp in a child process of its own
(``gguf_server``), or any OpenAI-compatible endpoint that returns log-probabilities (llama.cpp's server, vLLM,
``qlora-app serve``). The training process talks to either over the same HTTP client (``client``): the teacher's
weights never enter its memory, and what it sends back for each position of an answer is its k most likely tokens
with their log-probabilities (``topk``: the sparse loss the student learns from), kept per prompt for off-policy runs
(``answers``).

Owns: starting and stopping the llama.cpp child, the client, its probe (up, log-probabilities, vocabulary,
throughput), the top-k loss and the answers file. Must not plan (app/train/planning/teacher.py decides where the
teacher runs and records it) nor build trainers (app/train/methods/distill.py); torch is imported inside the
functions that need it, llama_cpp in the child only.
"""
