"""Getting a trained adapter out: export (adapter, merged, GGUF, Ollama) with its model card, push to the hub, and
prefetch for offline use. ``bundle`` does the exporting; ``gguf`` (the converter), ``lora_gguf`` (the adapter alone in
llama.cpp's LoRA format), ``quantize`` (llama.cpp's quantizer: Q4_K_M and the other types), ``template`` / ``card``
are its parts; ``measure`` asks what an export wrote (the merged model, each GGUF) the run's proof rows again, so the
card states the artifact's own accuracy; ``base_gguf`` writes a base model alone as a GGUF (for gguf-lora); ``mtp`` copies
the base's multi-token-prediction layers into a GGUF export where the converter writes them;
``llamacpp`` runs a GGUF in llama.cpp in a child process (a CPU fault is one line) and probes how quantized files run
on this CPU.

Owns: every file format an adapter leaves in and its card. Must not train, nor write into the run folder beyond its
own export folder and what it measured (recorded through app/run/record.record_export).
"""
