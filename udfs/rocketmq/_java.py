"""Java integer and string arithmetic that RocketMQ's behaviour depends on."""

from __future__ import annotations

import random
import unicodedata

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1


def i32(value: int) -> int:
    """Wrap ``value`` to a Java ``int`` (two's complement, 32 bits)."""
    return (value - INT_MIN) % 2**32 + INT_MIN


def i64(value: int) -> int:
    """Wrap ``value`` to a Java ``long``."""
    return (value - LONG_MIN) % 2**64 + LONG_MIN


def abs32(value: int) -> int:
    """``Math.abs(int)``: ``abs(Integer.MIN_VALUE)`` stays ``Integer.MIN_VALUE``."""
    return value if value == INT_MIN else abs(value)


def rem(dividend: int, divisor: int) -> int:
    """Java's ``%``: the remainder takes the sign of the dividend; raises on a zero divisor."""
    if divisor == 0:
        raise ZeroDivisionError("/ by zero")
    r = abs(dividend) % abs(divisor)
    return -r if dividend < 0 else r


def next_int(rng: random.Random) -> int:
    """``Random.nextInt()``: any ``int``."""
    return i32(rng.getrandbits(32))


def string_hash(text: str) -> int:
    """``String.hashCode()`` over UTF-16 code units."""
    units = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "little")) & 0xFFFFFFFF
    return i32(h)


def utf16_length(text: str) -> int:
    """``String.length()``: UTF-16 code units, so a character outside the BMP counts twice."""
    return len(text.encode("utf-16-le")) // 2


def is_blank(text: str | None) -> bool:
    """``UtilAll.isBlank``: null, empty, or only ``Character.isWhitespace`` characters."""
    return text is None or all(_is_java_whitespace(c) for c in text)


def _is_java_whitespace(char: str) -> bool:
    # Character.isWhitespace: the Unicode space, line and paragraph separators except the
    # no-break spaces, plus \t \n \u000B \f \r and \u001C-\u001F (but not \u0085).
    if char in "\t\n\u000b\f\r\u001c\u001d\u001e\u001f":
        return True
    return unicodedata.category(char) in ("Zs", "Zl", "Zp") and char not in "\u00a0\u2007\u202f"
