"""One module per command or command group; each stays thin over the pipeline's packages."""

from medhelm_local.errors import MedhelmError


class NotBuiltYet(MedhelmError):
    """A command whose feature is not in this version. It says so and exits 1; it never pretends."""

    def __init__(self, what: str, issue: int) -> None:
        super().__init__(f"{what} is not built yet in this version of medhelm-local (planned in issue {issue})")
