import pytest

from toolbelt.text import (
    capitalize_words,
    common_prefix,
    count_vowels,
    is_palindrome,
    pad_left,
    slugify,
    truncate,
    word_count,
)


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_separator():
    assert slugify("  a  b  c ", separator="_") == "a_b_c"


def test_slugify_digits():
    assert slugify("Version 2.0 released") == "version-2-0-released"


def test_word_count():
    assert word_count("the quick  brown\tfox") == 4
    assert word_count("") == 0


def test_capitalize_words():
    assert capitalize_words("hello big world") == "Hello Big World"


def test_truncate_short_text_unchanged():
    assert truncate("short", 10) == "short"


def test_truncate_cuts_with_ellipsis():
    assert truncate("abcdefghij", 8) == "abcde..."


def test_truncate_exact_width():
    assert truncate("abcdef", 6) == "abcdef"


def test_truncate_rejects_tiny_width():
    with pytest.raises(ValueError):
        truncate("abc", 2)


@pytest.mark.parametrize(
    "text",
    ["racecar", "A man, a plan, a canal: Panama", "", "No lemon, no melon"],
    ids=["racecar", "panama", "empty", "melon"],
)
def test_is_palindrome_true(text):
    assert is_palindrome(text)


def test_is_palindrome_false():
    assert not is_palindrome("palindrome")


def test_count_vowels():
    assert count_vowels("Programming Language") == 7


def test_pad_left():
    assert pad_left("7", 3, "0") == "007"
    assert pad_left("1234", 3, "0") == "1234"


def test_common_prefix():
    assert common_prefix("interstellar", "internet") == "inter"
    assert common_prefix("abc", "xyz") == ""
    assert common_prefix("same", "same") == "same"
