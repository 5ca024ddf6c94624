"""Frozen generators through litellm: the s3 answer prompt, judge_check, a sqlite cache, typed error mapping
(the errors are s3core.errors' upstream hierarchy; s3core/upstream.py maps litellm's exceptions onto it).

Importing this package is cheap: litellm is imported on the first call, not here.
"""

from generator_adapters.cache import ResponseCache
from generator_adapters.client import Answer, LLMClient
from generator_adapters.config import GeneratorConfig, JudgeConfig
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge, parse_yes_no

__all__ = [
    "Answer",
    "Generator",
    "GeneratorConfig",
    "Judge",
    "JudgeConfig",
    "LLMClient",
    "ResponseCache",
    "parse_yes_no",
]
