"""The MedHELM task taxonomy as data: categories > subcategories > tasks (Appendix A of the paper)."""

from medhelm_local.taxonomy.model import Category, Subcategory, Task, Taxonomy, load_taxonomy

__all__ = ["Category", "Subcategory", "Task", "Taxonomy", "load_taxonomy"]
