"""memo.py: at most so many entries, all forgotten at once when a new one would pass that."""

from __future__ import annotations

from gpuplan_operator.memo import Memo


def test_a_full_memo_forgets_everything_before_it_takes_a_new_key() -> None:
    memo: Memo[str, int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert (memo.get("a"), memo.get("b"), len(memo)) == (1, 2, 2)
    memo.put("b", 3)  # a key it holds is replaced: nothing forgotten
    assert (memo.get("a"), memo.get("b")) == (1, 3)
    assert memo.put("c", 4) == 4
    assert (memo.get("a"), memo.get("b"), memo.get("c"), len(memo)) == (None, None, 4, 1)
    memo.clear()
    assert len(memo) == 0
