"""`qlora-app serve RUN`: a run's adapter (and its base beside it) over the OpenAI API.

    engine.py  the model, loaded once (the 4-bit base wrapped with the adapter; the base answers with the adapter
               off), the run's chat template and system prompt, chat's and compare's generation path, one request
               generating at a time (the others wait their turn), stop strings, reading a reply's tool calls
    api.py     the HTTP routes (/v1/models, /v1/chat/completions with streaming, /v1/completions), OpenAI-style
               errors, the API key, a client that goes away mid-stream, a reply's tool calls and usage
    requests.py  what a request asks, read and checked: every field honoured or refused by name, messages with
               tool calls and tool results, stop strings, tools
    server.py  who may reach it (loopback, or a key), the start line, uvicorn
    vllm_engine.py  --engine vllm: the command of vLLM's own OpenAI server on the run's base and adapter (CUDA only)

Owns: serving a trained run. Must not train, plan or change a run folder.
"""
