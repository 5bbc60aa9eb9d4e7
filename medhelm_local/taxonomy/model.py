"""Pydantic model of the taxonomy and the loader for the shipped ``taxonomy.yaml``."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    # The condensed line of Appendix A this task was expanded from.
    line: str


class Subcategory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    tasks: list[Task] = Field(min_length=1)


class Category(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    definition: str
    inclusion_criteria: str
    task_performer: str
    subcategories: list[Subcategory] = Field(min_length=1)


class Taxonomy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    categories: list[Category] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Taxonomy:
        names = [s.name for c in self.categories for s in c.subcategories]
        names += [a for c in self.categories for s in c.subcategories for a in s.aliases]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"subcategory names or aliases used twice: {duplicates}")
        return self

    @property
    def subcategories(self) -> list[Subcategory]:
        return [s for c in self.categories for s in c.subcategories]

    @property
    def tasks(self) -> list[Task]:
        return [t for s in self.subcategories for t in s.tasks]

    def counts(self) -> dict[str, int]:
        return {"categories": len(self.categories), "subcategories": len(self.subcategories),
                "tasks": len(self.tasks)}

    def category(self, name: str) -> Category | None:
        return next((c for c in self.categories if c.name.casefold() == name.casefold()), None)

    def placement(self, subcategory: str) -> tuple[Category, Subcategory] | None:
        """The category and subcategory for a subcategory name or alias (case-insensitive)."""
        wanted = subcategory.casefold()
        for category in self.categories:
            for sub in category.subcategories:
                if wanted in {sub.name.casefold(), *(a.casefold() for a in sub.aliases)}:
                    return category, sub
        return None

    def as_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["counts"] = self.counts()
        return data


@cache
def load_taxonomy() -> Taxonomy:
    text = (resources.files("medhelm_local.taxonomy") / "taxonomy.yaml").read_text(encoding="utf-8")
    return Taxonomy.model_validate(yaml.safe_load(text))
