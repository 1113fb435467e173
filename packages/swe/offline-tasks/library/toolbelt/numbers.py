"""Integer and statistics helpers."""


def clamp(value, low, high):
    """Limit value to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """Middle value of a non-empty sequence (average of the two middle values for even lengths)."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def gcd(a, b):
    """Greatest common divisor of two integers (always non-negative)."""
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a


def lcm(a, b):
    """Least common multiple of two integers; 0 if either is 0."""
    if a == 0 or b == 0:
        return 0
    return abs(a * b) // gcd(a, b)


def is_prime(n):
    """True if n is a prime number."""
    if n < 2:
        return False
    divisor = 2
    while divisor * divisor <= n:
        if n % divisor == 0:
            return False
        divisor += 1
    return True


def primes_up_to(limit):
    """All primes p with 2 <= p <= limit, in increasing order."""
    return [n for n in range(2, limit + 1) if is_prime(n)]


def digit_sum(n):
    """Sum of the decimal digits of abs(n)."""
    total = 0
    n = abs(n)
    while n > 0:
        total += n % 10
        n //= 10
    return total


def percent(part, whole):
    """part as a percentage of whole, rounded to two decimals."""
    if whole == 0:
        raise ZeroDivisionError("whole must not be zero")
    return round(part * 100 / whole, 2)
