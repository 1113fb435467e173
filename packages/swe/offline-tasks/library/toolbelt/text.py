"""String helpers."""


def slugify(text, separator="-"):
    """Lower-case ASCII slug: runs of non-alphanumerics become one separator, no separator at the ends."""
    words = []
    current = ""
    for char in text.lower():
        if char.isascii() and char.isalnum():
            current += char
        elif current:
            words.append(current)
            current = ""
    if current:
        words.append(current)
    return separator.join(words)


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def capitalize_words(text):
    """Upper-case the first letter of every word, keep the rest as is."""
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


def truncate(text, width, ellipsis="..."):
    """Cut text to at most width characters, ending with the ellipsis when cut."""
    if width < len(ellipsis):
        raise ValueError("width is smaller than the ellipsis")
    if len(text) <= width:
        return text
    return text[: width - len(ellipsis)] + ellipsis


def is_palindrome(text):
    """True if the letters and digits of text read the same both ways (case-insensitive)."""
    cleaned = [c.lower() for c in text if c.isalnum()]
    return cleaned == cleaned[::-1]


def count_vowels(text):
    """Number of vowels (a, e, i, o, u; either case)."""
    return sum(1 for c in text.lower() if c in "aeiou")


def pad_left(text, width, fill=" "):
    """Pad text on the left with fill up to width characters."""
    if len(fill) != 1:
        raise ValueError("fill must be a single character")
    missing = width - len(text)
    if missing <= 0:
        return text
    return fill * missing + text


def common_prefix(first, second):
    """Longest common prefix of two strings."""
    length = 0
    limit = min(len(first), len(second))
    while length < limit and first[length] == second[length]:
        length += 1
    return first[:length]
