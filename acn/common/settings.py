"""Every setting, declared once with its default and help text; read from ACN_* variables.

The fields live in sections, one module each under acn/common/settings_sections/ (store, retrieval, compaction,
providers, serving, security); `Settings` composes them, so callers still read `settings.milvus_uri` and every
variable keeps its `ACN_<FIELD NAME IN CAPITALS>` name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pydantic

from acn.common.errors import ConfigurationError
from acn.common.settings_sections.compaction import CompactionSettings
from acn.common.settings_sections.providers import ProviderSettings
from acn.common.settings_sections.retrieval import RetrievalSettings
from acn.common.settings_sections.security import SecuritySettings
from acn.common.settings_sections.serving import ServingSettings
from acn.common.settings_sections.store import StoreSettings

ENV_PREFIX = "ACN_"

# In the order docs/configuration.md lists them. pydantic collects fields from the last base first, so the bases
# of `Settings` are this tuple reversed and `Settings.model_fields` runs section by section in this order too.
SECTIONS: tuple[tuple[str, type[pydantic.BaseModel]], ...] = (
    ("Store", StoreSettings),
    ("Retrieval", RetrievalSettings),
    ("Compaction", CompactionSettings),
    ("Providers", ProviderSettings),
    ("Serving", ServingSettings),
    ("Security", SecuritySettings),
)


class Settings(SecuritySettings, ServingSettings, ProviderSettings, CompactionSettings, RetrievalSettings,
               StoreSettings):
    """Server settings. Each field is read from the environment variable ACN_<FIELD NAME IN CAPITALS>."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ACN_* variables, then apply explicit overrides."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key in environ:
                values[name] = environ[key]
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except pydantic.ValidationError as error:
            # Name the variable the operator set, not the model field: "ACN_PORT: Input should be …".
            problems = [f"{ENV_PREFIX}{'.'.join(str(part) for part in item['loc']).upper()}: {item['msg']}"
                        for item in error.errors(include_input=False, include_url=False)]
            raise ConfigurationError("invalid settings: " + "; ".join(problems), problems) from None
