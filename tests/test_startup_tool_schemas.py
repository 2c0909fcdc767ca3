"""A tool's JSON schema is generated from its input model once per process: a child session, which
makes its tools again, reuses it, and each tool still gets a schema of its own."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from osprey.tools.base import Tool, ToolInput, clean_schema, model_schema
from osprey.tools.builtin import ReadFileInput

GENERATED: list[str] = []


class _CountedInput(ToolInput):
    path: str = Field(description="A path.")
    limit: int = Field(0, ge=0)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        GENERATED.append(cls.__name__)
        return super().model_json_schema(*args, **kwargs)


async def _run(call: Any, context: Any) -> str:
    return "ok"


def test_a_models_schema_is_generated_once_and_each_tool_gets_its_own_copy() -> None:
    first = Tool.from_model("counted", "Counts.", _CountedInput, _run)
    second = Tool.from_model("counted", "Counts.", _CountedInput, _run)
    assert GENERATED == ["_CountedInput"]
    assert first.parameters == second.parameters == clean_schema(_CountedInput.model_json_schema())
    assert first.parameters is not second.parameters
    first.parameters["properties"]["path"]["description"] = "changed"
    assert second.parameters["properties"]["path"]["description"] == "A path."
    assert model_schema(_CountedInput)["properties"]["path"]["description"] == "A path."


def test_a_builtin_tools_schema_is_the_cleaned_schema_of_its_model() -> None:
    schema = model_schema(ReadFileInput)
    assert schema == clean_schema(ReadFileInput.model_json_schema())
    assert "title" not in schema and schema["type"] == "object" and "path" in schema["properties"]
