"""hypothesis's palettes for the fuzzed records of :mod:`streaming.sim.fuzz`."""

from __future__ import annotations

from hypothesis import strategies as st

from streaming.sim.fuzz import CORE_TEXTS, CORE_VALUES, Palette

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.recursive(
        st.integers() | st.text(max_size=3), lambda c: st.lists(c, max_size=2), max_leaves=5
    ),
)


def palettes() -> st.SearchStrategy[Palette]:
    return st.builds(
        Palette,
        st.lists(VALUES, max_size=40).map(lambda v: [*CORE_VALUES, *v]),
        st.lists(st.text(min_size=1, max_size=40), max_size=20).map(lambda t: [*CORE_TEXTS, *t]),
        st.integers(0, 2**32),
    )
