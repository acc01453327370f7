# LAB FIXTURE STAND-IN -- written for the gpufleet.llm test lab, not Moonshot AI's code.
#
# config.json "auto_map" names this module. The fixture's tensors are tiny random arrays that do not
# match the real config shapes, so there is deliberately no forward pass here: anything that tries to
# run this "model" must fail loudly instead of producing plausible-looking output.
"""Modeling stand-in for the Kimi-K2.6-mini lab fixture."""

from .configuration_kimi_k25 import KimiK25Config  # noqa: F401  (auto_map resolves it here)


class KimiK25ForConditionalGeneration:
    config_class = KimiK25Config

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "Kimi-K2.6-mini is a gpufleet.llm lab fixture: its weights are random stand-ins "
            "and cannot be run. Use the lab's SGLang stand-in instead."
        )
