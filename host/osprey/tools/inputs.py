"""The input models of the control, memory, process, session search and skill tools, kept apart
from the tools so that a session that never calls one of them never defines them: their schemas
are stored (`schema_store.py`), and this module is imported at the first call of one (`Tool.stored`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..memory.base import MemoryOperation
from .base import ToolInput
from .control import MAX_QUESTION_CHARS, MAX_SUMMARY_CHARS, MAX_TODO_CHARS, MAX_TODO_ITEMS
from .memory_tool import MAX_OPERATIONS
from .session_search import MAX_HITS


def _not_blank(field: str) -> Any:
    """A validator of the text field `field`: refused when blank, kept stripped."""

    def check(cls: type[ToolInput], value: str) -> str:
        if not value.strip():
            raise ValueError(f"{field} is blank")
        return value.strip()

    return field_validator(field)(classmethod(check))


class TodoItem(ToolInput):
    content: str = Field(min_length=1, max_length=MAX_TODO_CHARS, description="What this step is, in one line.")
    status: Literal["pending", "in_progress", "completed"] = Field(description="pending, in_progress (at most one item) or completed.")

    _stripped = _not_blank("content")


class TodoWriteInput(ToolInput):
    todos: list[TodoItem] = Field(max_length=MAX_TODO_ITEMS, description=(
        f"The whole task list, in order (it replaces the previous one), at most {MAX_TODO_ITEMS} items."))

    @model_validator(mode="after")
    def _one_in_progress(self) -> TodoWriteInput:
        working = sum(item.status == "in_progress" for item in self.todos)
        if working > 1:
            raise ValueError(f"{working} items are in_progress; at most one may be (mark the others pending or completed)")
        return self


class TaskStatusInput(ToolInput):
    status: Literal["done", "blocked"] = Field(description="done: the task is finished and verified; blocked: you cannot go on without help.")
    summary: str = Field(min_length=1, max_length=MAX_SUMMARY_CHARS, description=(
        "For done: what you did and how you verified it. For blocked: what stops you and what you need."))

    _stripped = _not_blank("summary")


class QuestionInput(ToolInput):
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description=(
        "One clear question for the person, with the options you see if there are any."))

    _stripped = _not_blank("question")


class MemoryInput(ToolInput):
    action: Literal["add", "replace", "remove", "recall", "batch"] = Field(description="What to do.")
    content: str = Field("", max_length=10_000, description="add, replace: the entry's new text.")
    old_text: str = Field("", max_length=10_000, description="replace, remove: a substring found in exactly one entry.")
    target: Literal["memory", "user"] = Field("memory", description="memory: the project and its context; user: facts about the user.")
    query: str = Field("", max_length=2_000, description="recall: words that must all appear (case-insensitive).")
    operations: list[MemoryOperation] = Field(default_factory=list, max_length=MAX_OPERATIONS,
                                              description="batch: add, replace and remove operations, in order.")


class ProcessInput(ToolInput):
    action: Literal["start", "list", "output", "stop"] = Field(description="start a command, list processes, read a process's output, or stop one.")
    command: str = Field("", description="With start: the bash command to run in the background.")
    workdir: str = Field("", description="With start: directory to run in (default: the working directory).")
    id: str = Field("", description="With output and stop: the process id that start returned.")
    since_last_read: bool = Field(True, description="With output: only output not returned before (false: all that is kept).")


class SessionSearchInput(ToolInput):
    query: str = Field(min_length=1, max_length=1000, description="The words to find (plain words; quotes and operators are read as words).")
    workspace: str | None = Field(None, max_length=4096, description=(
        "Only sessions run in this directory or below it (absolute, or relative to the working directory); default: every workspace."))
    limit: int = Field(10, ge=1, le=MAX_HITS, description="At most this many hits.")


class LoadSkillInput(ToolInput):
    name: str = Field(min_length=1, max_length=200, description="The skill's name, as listed in the system prompt (namespace:name for a namespaced skill).")
    file: str = Field("", max_length=4096, description="One of the skill's other files, by the path load_skill listed (relative to the "
                                                       "skill's directory); empty: the skill's instructions.")
