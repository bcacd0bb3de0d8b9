"""A model's small files as a plan reads them, each once: config.json (a dict), transformers' config object made
from that dict, the model built from it on the meta device (one per class a run may open it with), and the
tokenizer with the context length. app/train/planning/plan.py makes one ``ModelFiles`` per plan (or per set of plans:
card_verdicts) and hands it to every step that asks about the model (its family and class, images, experts, the
memory estimate, the precision lines), so config.json is parsed once and the meta model built once, a vision
mixture-of-experts model included, and the tokenizer and a vision model's processor loaded once. The session hands
the plan's to the training load and to the proof (app.model.load.load_base_model's ``files``), so a run's stages
read them too, never again.

Owns ``ModelFiles``. Must not load weights; transformers is imported inside its methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.model.load import load_tokenizer
from app.model.placement import context_length
from app.model.shape import meta_model, read_config
from app.model.source import model_load_error, model_on_disk
from app.model.vision import load_processor


@dataclass(eq=False)
class ModelFiles:
    """What is known of model ``name`` before any weight loads. ``config`` is None where its config.json is not on
    disk (a hub model not in the cache: a dry run plans it by the size in its name)."""

    name: str
    revision: str | None = None
    trust_remote_code: bool = False
    config: dict | None = None
    _hf_config: Any = field(default=None, repr=False)
    _shells: dict = field(default_factory=dict, repr=False)
    _tokenizer: Any = field(default=None, repr=False)
    _processor: Any = field(default=None, repr=False)

    @classmethod
    def read(cls, mc) -> "ModelFiles":
        """The files of the run's model (``mc``: its ModelConfig): config.json read here, the rest when asked."""
        name = mc.name_or_path or ""
        return cls(name, mc.revision, mc.trust_remote_code, read_config(name))

    def hf_config(self, local_only: bool = True):
        """transformers' config of the model, made from config.json once (a model with its own code, or one not on
        disk, is read by transformers itself: downloaded unless ``local_only``)."""
        if self._hf_config is None:
            from transformers import AutoConfig
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING

            known = self.config is not None and self.config.get("model_type") in CONFIG_MAPPING
            if known and not (self.trust_remote_code and self.config.get("auto_map")):
                self._hf_config = CONFIG_MAPPING[self.config["model_type"]].from_dict(dict(self.config))
            else:
                self._hf_config = AutoConfig.from_pretrained(self.name, revision=self.revision,
                                                             trust_remote_code=self.trust_remote_code,
                                                             local_files_only=local_only)
                if self.config is None:  # not on disk when the plan began: in the cache now
                    self.config = read_config(self.name)
        return self._hf_config

    def shell(self, images: bool):
        """The model built on the meta device as a run opens it (image-text-to-text when ``images``, else causal LM):
        its module tree and shapes, no memory. Built once per class."""
        if images not in self._shells:
            self._shells[images] = meta_model(self.name, self.revision, self.trust_remote_code, local_only=True,
                                              images=images, config=self.hf_config())
        return self._shells[images]

    def tokenizer(self, mc, local_only: bool):
        """The run's tokenizer (``mc``: its ModelConfig; app.model.load.load_tokenizer: its pad token, its named chat
        template), loaded once; raises what loading raises (downloaded unless ``local_only``)."""
        if self._tokenizer is None:
            config = self.hf_config(local_only) if self.config is not None else None  # the class it names
            self._tokenizer = load_tokenizer(mc, local_only, config)
        return self._tokenizer

    def processor(self, local_only: bool = True):
        """The processor of a model that reads images (app.model.vision.load_processor), loaded once for the plan,
        the training load and the proof; raises what loading raises."""
        if self._processor is None:
            config = self.hf_config(local_only) if self.config is not None else None  # the class it names
            self._processor = load_processor(self.name, self.revision, self.trust_remote_code, local_only=local_only,
                                             config=config)
        return self._processor

    def tokenizer_on_disk(self, mc):
        """The tokenizer where its files are on disk, else None (the memory estimate counts characters then: it runs
        before anything is downloaded)."""
        try:
            return self.tokenizer(mc, local_only=True)
        except Exception:  # noqa: BLE001 - not on disk yet, or a tokenizer of its own code: characters instead
            return None

    def tokenizer_and_context(self, mc, local_only: bool, quiet: bool = False) -> tuple:
        """(tokenizer, context length in tokens) of the run's model, never its weights; a file that is missing or
        that its own class rejects is one line (UserError), or (None, None) when ``quiet`` (a dry run, doctor)."""
        if quiet and not model_on_disk(self.name):
            return None, None
        from huggingface_hub.errors import StrictDataclassError  # heavy: only when a run is being planned

        try:
            return self.tokenizer(mc, local_only), context_length(self.hf_config(local_only))
        except (OSError, ValueError, StrictDataclassError) as e:  # the last: a config.json its own class rejects
            if quiet:
                return None, None
            raise model_load_error(self.name, e) from None
