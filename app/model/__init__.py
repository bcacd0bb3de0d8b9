"""A base model: where it comes from (source), where and how it runs (placement: device, compute dtype, attention,
packing), loading it in 4-bit (load), attaching LoRA (lora), its size and its meta-device shell (shape), its small
files as a plan reads them, each once (files: config.json, the meta-device shell), the Unsloth backend
(unsloth_backend), its chat templates (templates), generating from it (generation), a run's adapter opened
on its base (pair: the one way every command loads a trained adapter), and what a vision-language model is made of
(vision: its vision side kept 16-bit, its language model's LoRA targets, its processor), a checkpoint
published quantized (published: MXFP4 and FP8 read into NF4 a tensor at a time, other formats one line), or a
mixture-of-experts model (experts: its fused expert weights found, counted as they load, quantized as they load, named for PEFT), and
its family (family: the class transformers opens it with, its chat template and what TRL does with it), and a
distillation run's teacher (teacher: found, checked against the student's vocabulary, loaded for inference).

Owns: every call into transformers/bitsandbytes/PEFT that makes or runs a model. The decisions are small pure
functions, tested without a GPU; the loading is the real path, tested on tiny models. Must not train, plan a run or
write a run folder; torch and transformers are imported inside functions only."""
