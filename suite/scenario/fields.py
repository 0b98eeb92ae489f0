"""Field types of scenario files whose allowed values come from a registry, not from a fixed Literal (and
`Strict`, the base every scenario model shares).  The axes themselves are listed in suite/axes.py.

`StrategyName` accepts any registered strategy name or alias (suite/strategies/registry.py) and validates to
the strategy's name, so an alias (`fsdp`) is resolved once, here, and nothing downstream sees it.  Its JSON
Schema is an enum of the names and aliases registered when the schema is generated (`suite schema`), so a
strategy registered by a plugin is allowed by editors too.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

from suite.strategies import registry


class Strict(BaseModel):
    """The base of every scenario model: unknown keys are errors, values are frozen, floats are finite."""

    # allow_inf_nan=False: every float of a scenario must be finite (`lr: .inf`, `betas: [.nan, .nan]`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _RegisteredStrategy:
    """Pydantic hooks for a str validated against the strategy registry."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(registry.resolve, core_schema.str_schema())

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> Any:
        return {"type": "string", "enum": registry.accepted()}


StrategyName = Annotated[str, _RegisteredStrategy]


def resolve_alias(value: Any) -> Any:
    """A strategy alias in an `exclude` entry or `match` gate becomes its name; anything else is left as is
    (an unknown value simply matches no cell there, as before)."""
    if isinstance(value, str):
        try:
            return registry.resolve(value)
        except ValueError:
            return value
    return value
