"""Type stubs of the compiled core (`tokscan._core`)."""

from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "Profile",
    "Scan",
    "Validator",
    "__version__",
    "builtin_profiles",
    "check_one",
    "codes",
    "discover_inputs",
    "profile_aliases",
]
__version__: str

@final
class Profile:
    @staticmethod
    def load(name_or_path: str, tokenizer: str | None = None) -> Profile: ...
    @property
    def name(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def special_tokens(self) -> list[tuple[str, int]]: ...
    @property
    def pad_id(self) -> int | None: ...
    def describe_json(self) -> str: ...
    def with_spelled(self, patterns: list[tuple[str, list[int]]]) -> Profile: ...
    @property
    def spelled(self) -> list[tuple[str, list[int]]]: ...

@final
class Scan:
    def __new__(
        cls,
        paths: list[str],
        profile: Profile,
        columns: dict[str, str] | None = None,
        threads: int = 0,
        severities: dict[str, str] | None = None,
    ) -> Scan: ...
    def run(self) -> str: ...
    def progress(self) -> dict[str, int]: ...
    def cancel(self) -> None: ...

@final
class Validator:
    def __new__(cls, profile: Profile, pad_id: int | None = None, threads: int = 1) -> Validator: ...
    @property
    def pad_id(self) -> int | None: ...
    def check_numpy(
        self,
        ids: npt.NDArray[Any],
        offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64] | None = None,
        loss_mask: npt.NDArray[Any] | None = None,
        mask_offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...
    def check_each(
        self, ids: list[npt.NDArray[Any]], masks: list[npt.NDArray[Any] | None] | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...
    def check_arrow(self, ids: Any, loss_mask: Any = None) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...

def codes() -> list[tuple[str, int, str, str]]: ...
def builtin_profiles() -> list[str]: ...
def profile_aliases() -> list[tuple[str, str]]: ...
def check_one(
    profile: Profile, ids: list[int], prompt_len: int | None = None, mask: list[int] | None = None
) -> dict: ...
def discover_inputs(paths: list[str]) -> list[tuple[str, str, str | None]]: ...
