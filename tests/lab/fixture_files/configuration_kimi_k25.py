# LAB FIXTURE STAND-IN -- written for the gpufleet.llm test lab, not Moonshot AI's code.
#
# The real moonshotai/Kimi-K2.6 repository ships a custom-code configuration module referenced
# from config.json "auto_map" (so loading it needs trust_remote_code). This file only has to exist,
# be small and be importable without torch, so the lab can check that auto_map targets are present
# in the downloaded tree. It mirrors the config layout (top-level multimodal wrapper + text_config)
# and nothing else.
"""Configuration stand-in for the Kimi-K2.6-mini lab fixture."""

try:  # transformers is optional: the lab never instantiates this class for real.
    from transformers import PretrainedConfig
except ImportError:  # pragma: no cover - lab hosts do not install transformers
    class PretrainedConfig:  # type: ignore[no-redef]
        def __init__(self, **kwargs):
            for key, value in kwargs.items():
                setattr(self, key, value)


class KimiK25Config(PretrainedConfig):
    model_type = "kimi_k25"

    def __init__(self, text_config=None, vision_config=None, **kwargs):
        self.text_config = dict(text_config or {})
        self.vision_config = dict(vision_config or {})
        super().__init__(**kwargs)

    @property
    def num_hidden_layers(self):
        return self.text_config.get("num_hidden_layers")
