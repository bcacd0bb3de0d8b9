"""The sections only one method reads: GRPO's (its losses, sampling and tool rounds), the tools a GRPO run may call,
DPO's (its losses), KTO's and distillation's (its teacher and divergence). Re-exported by app/config/schema.py,
where ``AppConfig`` holds them.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from app.config.fields import AutoBool, StrictModel, _d, _one_is_a_list

# TRL's GRPO losses (trl 1.16, GRPOConfig.loss_type), checked here so a typo is one line before anything loads;
# tests/config/test_build.py keeps this list equal to the names the installed TRL documents.
LOSS_TYPES = {
    "dapo": "token-level, normalised by the tokens in the whole batch (TRL's default)",
    "grpo": "per-sequence mean (length bias: prefers short right and long wrong answers)",
    "dr_grpo": "normalised by a constant (max_completion_length): no length bias",
    "bnpo": "token-level, normalised by the tokens in the local batch",
    "cispo": "clipped importance weights on a REINFORCE loss (ScaleRL; epsilon_high ~5)",
    "sapo": "soft gates instead of hard clipping (SAPO)",
    "luspo": "length-unbiased sequence-level loss (needs importance_sampling_level=sequence)",
    "vespo": "variance-reduced sequence-level weights (importance_sampling_level=token)",
}


class GRPOConfig(StrictModel):
    num_generations: int = _d(4, "completions sampled per prompt (the group GRPO compares within)", ge=2)
    max_completion_length: int = _d(256, "tokens a completion may take", gt=0)
    temperature: float = _d(1.0, "sampling temperature; groups need spread, so keep it near 1", gt=0)
    top_p: float = _d(1.0, "nucleus sampling", gt=0, le=1.0)
    beta: float = _d(0.0, "KL coefficient; 0 = no reference model (saves memory)", ge=0)
    loss_type: str = _d("dapo", "TRL's GRPO loss: " + "; ".join(f"{k} = {v}" for k, v in LOSS_TYPES.items()))
    importance_sampling_level: Literal["token", "sequence"] = _d(
        "token", "importance ratio per token, or one per sequence (sequence = GSPO, often steadier)")
    scale_rewards: Literal["group", "batch", "none"] = _d(
        "group", "divide advantages by the reward spread of each group, of the whole batch, or not at all (none: "
                 "Dr. GRPO's advice against a difficulty bias)")
    mask_truncated_completions: bool = _d(False, "leave completions cut at max_completion_length out of the loss "
                                                 "(DAPO: they are not wrong, only unfinished)")
    epsilon: float = _d(0.2, "lower clip range of the importance ratio", gt=0)
    epsilon_high: float | None = _d(None, "upper clip range; empty = epsilon (DAPO's clip-higher uses 0.28; cispo "
                                          "reads it as its max, ~5)", gt=0)

    @field_validator("loss_type")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        if v not in LOSS_TYPES:
            hint = difflib.get_close_matches(v, LOSS_TYPES, n=1)
            raise ValueError(f"unknown GRPO loss '{v}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                             + f"; TRL's losses: {', '.join(LOSS_TYPES)}")
        return v
    generation_batch_size: int | None = _d(None, "completions sampled at once (they serve several optimizer steps); "
                                                 "empty = auto: about 64, at most 4 optimizer steps' worth", gt=0)
    sampler: Literal["auto", "merged", "plain"] = _d(
        "auto", "where completions are sampled: merged = a dense copy of the base with the current LoRA merged in "
                "(refreshed every step; compiled with a static cache on CUDA); plain = the 4-bit training model; "
                "auto = merged where the copy fits")
    use_vllm: AutoBool = _d(None, "sample with vLLM in colocate mode (same GPU); empty = auto: on on CUDA when "
                                     "vllm is installed")
    vllm_gpu_memory_utilization: float = _d(0.3, "share of the GPU vLLM may take for weights and KV cache",
                                            gt=0, le=1.0)
    max_tool_calls: int = _d(3, "tool runs: rounds of tool calls a completion may make (TRL's "
                                "max_tool_calling_iterations); results and the answers after them count within "
                                "max_completion_length", ge=1, le=64)


class ToolsConfig(StrictModel):
    use: Annotated[list[str], BeforeValidator(_one_is_a_list)] = Field(default_factory=list, description=(
        "tools the model may call while it answers (GRPO, chat, compare): a built-in name (calculator), FILE.py (its "
        "public typed, documented functions) or FILE.py:fn1,fn2"))
    environment: str | None = _d(None, "a multi-turn environment, FILE.py:Class: its public methods are the tools, "
                                       "reset(**row) starts each rollout, an optional get_reward() scores it")
    timeout_s: float = _d(10.0, "seconds a tool call may take; a slower call becomes an error result the model sees "
                                "and the run goes on", gt=0)
    max_output_chars: int = _d(2000, "characters of a tool's result the model is shown (the rest is cut, and said)",
                               ge=16)

    @property
    def enabled(self) -> bool:
        return bool(self.use or self.environment)

    @field_validator("use")
    @classmethod
    def _once_each(cls, v: list[str]) -> list[str]:
        """A tool named twice (--tools calculator --tools calculator) is the same tool: kept once, in order."""
        return list(dict.fromkeys(x.strip() for x in v if x.strip()))


# TRL's DPO losses (trl 1.16, DPOConfig.loss_type); tests/e2e/test_dpo.py keeps this list equal to the names the
# installed TRL documents.
DPO_LOSS_TYPES = {
    "sigmoid": "DPO's logistic loss on the chosen-rejected reward difference (the original)",
    "hinge": "hinge loss on it (SLiC)",
    "ipo": "squared loss toward 1/(2 beta) (IPO: does not overfit to deterministic preferences)",
    "exo_pair": "reverse-KL to the preference distribution (EXO)",
    "nca_pair": "absolute rewards, not only their difference (NCA)",
    "robust": "DPO that expects some labels to be flipped (label_smoothing is the flip rate)",
    "bco_pair": "a binary classifier of chosen vs rejected (BCO)",
    "sppo_hard": "self-play preference optimization, hard labels (SPPO)",
    "aot": "alignment via optimal transport, paired (AOT)",
    "aot_unpaired": "alignment via optimal transport, unpaired",
    "apo_zero": "anchored: push chosen up and rejected down (APO-zero, for chosen better than the model)",
    "apo_down": "anchored: push both down, rejected more (APO-down, for chosen worse than the model)",
    "discopop": "log-ratio modulated loss (DiscoPOP)",
    "sft": "the chosen answer's negative log-likelihood: mixed in with loss_weights it is RPO",
    "sigmoid_norm": "DPO on length-normalized log-probabilities",
}


def _known_dpo_loss(v):
    if v is None:  # `--set dpo.loss_type=`: back to the default, as an empty value means for every key
        return ["sigmoid"]
    names = [v] if isinstance(v, str) else list(v)
    names = [n.strip() for name in names for n in str(name).split(",") if n.strip()]
    for name in names:
        if name not in DPO_LOSS_TYPES:
            hint = difflib.get_close_matches(name, DPO_LOSS_TYPES, n=1)
            raise ValueError(f"unknown DPO loss '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                             + f"; TRL's losses: {', '.join(DPO_LOSS_TYPES)}")
    if not names:
        raise ValueError("name at least one DPO loss, e.g. sigmoid")
    return names


class KTOSection(StrictModel):
    beta: float = _d(0.1, "how far the adapter may move from the base (the reference, the adapter switched off): "
                          "higher stays closer", gt=0)
    desirable_weight: float | None = _d(None, "the loss weight of answers labelled good; empty = auto: balanced "
                                              "against the bad ones by their counts (KTO's advice: good x weight "
                                              "about bad x undesirable_weight)", gt=0)
    undesirable_weight: float = _d(1.0, "the loss weight of answers labelled bad", gt=0)


class DPOSection(StrictModel):
    loss_type: list[str] = _d(["sigmoid"], "TRL's DPO loss, or several mixed by loss_weights (sigmoid,sft is RPO): "
                              + "; ".join(f"{k} = {v}" for k, v in DPO_LOSS_TYPES.items()))
    loss_weights: list[float] | None = _d(None, "one weight per loss in loss_type; empty = 1 each")
    beta: float = _d(0.1, "DPO: how far the adapter may move from the base (the reference, the adapter switched "
                          "off): higher stays closer; ORPO: the weight of its odds-ratio term (lambda)", gt=0)
    label_smoothing: float = _d(0.0, "robust / exo_pair: the share of labels taken to be flipped", ge=0, lt=0.5)

    @field_validator("loss_type", mode="before")
    @classmethod
    def _losses(cls, v):
        return _known_dpo_loss(v)

    @model_validator(mode="after")
    def _weights_match(self) -> "DPOSection":
        if self.loss_weights is not None and len(self.loss_weights) != len(self.loss_type):
            raise ValueError(f"dpo.loss_weights has {len(self.loss_weights)} weight(s) for {len(self.loss_type)} "
                             f"loss(es) ({', '.join(self.loss_type)}); give one weight per loss")
        return self


# What each distill.mode runs, in the words the plan, the demo and the card say it
DISTILL_MODES = {
    "on_policy": "on-policy: the student answers, the teacher scores every token of its answers",
    "off_policy": "off-policy: the teacher answers each training prompt once, greedily, and the student learns "
                  "those answers (SFT)",
}


class DistillSection(StrictModel):
    """Distillation (method distill, TRL's DistillationTrainer): the student (the run's model with its LoRA) writes
    its own answers and learns the teacher's next-token distribution on every token of them (on-policy, GKD's
    lmbda = 1; TRL's stable trainer has no off-policy share), or SFT on answers the teacher wrote once
    (off_policy: the cheap variant)."""

    teacher: str | None = _d(None, "the model that knows the task: a model id or folder (loaded 4-bit unless "
                                   "distill.teacher_4bit=false), or a qlora-app run folder (its base with its "
                                   "adapter, inference only), both beside the student; or one never in training "
                                   "memory: a .gguf file (llama.cpp in a child process, on the CPU and "
                                   "distill.teacher_gpu_layers) or an http(s)://host:port/v1 OpenAI-compatible "
                                   "endpoint that returns log-probabilities; it must share the student's vocabulary")
    teacher_4bit: bool = _d(True, "load a model teacher in 4-bit NF4 (a run teacher loads as its run did); false: "
                                  "16-bit, about 4x its memory")
    teacher_system_prompt: str | None = _d(None, "the system prompt the teacher is asked with: unset, as it was "
                                                 "trained (a run teacher: its run's data.system_prompt; a model: the "
                                                 "student's); a text: that one; an empty text (--set "
                                                 "distill.teacher_system_prompt='\"\"'): none")
    mode: Literal["on_policy", "off_policy"] = _d(
        "on_policy", "on_policy: the student samples, the teacher scores every token (TRL's DistillationTrainer); "
                     "off_policy: the teacher answers each prompt once, greedily, then SFT on its answers")
    beta: float = _d(1.0, "the divergence (TRL's generalized JSD): 0 = forward KL (cover everything the teacher "
                          "might say), 1 = reverse KL (the on-policy distillation default: commit to the teacher's "
                          "best answer), 0.5 = JSD", ge=0, le=1)
    temperature: float = _d(1.0, "sampling temperature of the student's answers and of both distributions in the "
                                 "loss (TRL's)", gt=0)
    max_completion_length: int = _d(256, "tokens an answer may take, the student's samples and the teacher's "
                                         "written answers alike", gt=0)
    top_k: int = _d(20, "a GGUF or endpoint teacher: its most likely tokens returned per answer position, the "
                        "support of the loss (with the answer's own token and a tail bucket for the rest); 20 is "
                        "what OpenAI-compatible servers return at most (OpenAI's and vLLM's default cap), and "
                        "top-k KD with a tail tracks the full KL closely from a few tens down", ge=1, le=20)
    teacher_threads: int | None = _d(None, "a GGUF teacher: CPU threads llama.cpp runs on (unset: half this "
                                           "machine's cores, the rest train)", ge=1)
    teacher_context: int | None = _d(None, "a GGUF teacher: its context in tokens (unset: the run's longest prompt "
                                           "plus distill.max_completion_length, within the file's own)", ge=16)
    teacher_gpu_layers: int = _d(0, "a GGUF teacher: layers llama.cpp offloads to the GPU (0: none, the card is "
                                    "the student's; -1: all)", ge=-1)
    teacher_model: str | None = _d(None, "an endpoint teacher: the model name to ask it for (unset: the first it "
                                         "lists at /v1/models)")
    teacher_timeout: float = _d(120.0, "a GGUF or endpoint teacher: seconds one request may take before it is "
                                       "retried (3 tries; then the run stops at its last checkpoint)", gt=0)

    @property
    def outside(self) -> str | None:
        """"endpoint" for an http(s) URL teacher, "gguf" for a .gguf file (both outside the training process: app/
        teacher/), else None (a model or a run, loaded beside the student)."""
        text = str(self.teacher or "").strip().lower()
        if text.startswith(("http://", "https://")):
            return "endpoint"
        return "gguf" if text.endswith(".gguf") else None

