"""English spoken forms: cardinals, ordinals, decimals, years, digits, money, units and abbreviations."""

from __future__ import annotations

__all__ = [
    "ABBREVIATIONS", "CURRENCIES", "UNITS", "cardinal", "decimal", "digits", "fraction", "money", "ordinal", "time",
    "with_unit", "year",
]  # fmt: skip

_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_MAX_CARDINAL = 10**15
_IRREGULAR_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                       "nine": "ninth", "twelve": "twelfth"}  # fmt: skip
_FRACTION_NAMES = {2: ("half", "halves"), 4: ("quarter", "quarters")}

#: Currency symbol → (unit, units, sub-unit, sub-units).
CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "", ""),
}
#: Unit symbol → (singular, plural). Only symbols that are unambiguous after a number.
UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "l": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "°c": ("degree Celsius", "degrees Celsius"), "°f": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
    "kb": ("kilobyte", "kilobytes"), "mb": ("megabyte", "megabytes"), "gb": ("gigabyte", "gigabytes"),
    "tb": ("terabyte", "terabytes"), "mbps": ("megabit per second", "megabits per second"),
    "gbps": ("gigabit per second", "gigabits per second"),
    "hz": ("hertz", "hertz"), "khz": ("kilohertz", "kilohertz"), "mhz": ("megahertz", "megahertz"),
    "ghz": ("gigahertz", "gigahertz"), "w": ("watt", "watts"), "kw": ("kilowatt", "kilowatts"),
    "kwh": ("kilowatt hour", "kilowatt hours"), "v": ("volt", "volts"),
    "ms": ("millisecond", "milliseconds"), "s": ("second", "seconds"), "sec": ("second", "seconds"),
    "min": ("minute", "minutes"), "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
}  # fmt: skip
#: Abbreviations with their period → spoken form. ``St.`` and ``Dr.`` depend on context (see ``normalize.rules``).
ABBREVIATIONS = {
    "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Prof.": "Professor", "Jr.": "Junior", "Sr.": "Senior",
    "etc.": "et cetera", "e.g.": "for example", "i.e.": "that is", "vs.": "versus", "vs": "versus",
    "approx.": "approximately", "Ave.": "Avenue", "Rd.": "Road", "Blvd.": "Boulevard", "Mt.": "Mount",
    "Inc.": "Incorporated", "Ltd.": "Limited", "Corp.": "Corporation", "Dept.": "Department", "Fig.": "Figure",
    "No.": "number", "Jan.": "January", "Feb.": "February", "Mar.": "March", "Apr.": "April", "Jun.": "June",
    "Jul.": "July", "Aug.": "August", "Sep.": "September", "Sept.": "September", "Oct.": "October",
    "Nov.": "November", "Dec.": "December",
}  # fmt: skip


def _below_thousand(n: int) -> list[str]:
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(f"{_TENS[tens]}-{_ONES[ones]}" if ones else _TENS[tens])
    elif rest:
        words.append(_ONES[rest])
    return words


def cardinal(n: int) -> str:
    """``1234`` → ``one thousand two hundred thirty-four``; past a quadrillion, digit by digit."""
    if n < 0:
        return f"minus {cardinal(-n)}"
    if n >= _MAX_CARDINAL:
        return digits(str(n))
    if n < 1000:
        return " ".join(_below_thousand(n)) or "zero"
    words: list[str] = []
    for scale, name in _SCALES:
        count, n = divmod(n, scale)
        if count:
            words += [*_below_thousand(count), name]
    words += _below_thousand(n)
    return " ".join(words)


def ordinal(n: int) -> str:
    """``21`` → ``twenty-first``."""
    words = cardinal(n)
    head, sep, last = words.rpartition(" ")
    stem, dash, unit = last.rpartition("-")
    if unit in _IRREGULAR_ORDINALS:
        unit = _IRREGULAR_ORDINALS[unit]
    elif unit.endswith("y"):
        unit = unit[:-1] + "ieth"
    else:
        unit += "th"
    return f"{head}{sep}{stem}{dash}{unit}"


def digits(text: str, zero: str = "zero") -> str:
    """Digit by digit: ``4521`` → ``four five two one``."""
    return " ".join(zero if c == "0" else _ONES[int(c)] for c in text if c.isdigit())


def decimal(text: str) -> str:
    """``-3.14`` → ``minus three point one four``; ``1,234`` → ``one thousand two hundred thirty-four``."""
    sign = "minus " if text.startswith("-") else ""
    whole, _, fraction = text.lstrip("+-").replace(",", "").partition(".")
    # A leading zero marks a code (007): people read it digit by digit.
    spoken = digits(whole) if len(whole) > 1 and whole.startswith("0") else cardinal(int(whole or "0"))
    if fraction:
        spoken += f" point {digits(fraction)}"
    return sign + spoken


def year(n: int) -> str:
    """``1990`` → ``nineteen ninety``, ``2005`` → ``two thousand five``, ``1905`` → ``nineteen oh five``."""
    if n < 1000 or n >= 10000 or (2000 <= n < 2010) or n % 1000 == 0:
        return cardinal(n)
    century, rest = divmod(n, 100)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    return f"{cardinal(century)} {'oh ' + _ONES[rest] if rest < 10 else cardinal(rest)}"


def money(amount: str, symbol: str, scale: str = "") -> str:
    """``19.99``, ``$`` → ``nineteen dollars and ninety-nine cents``; with a scale: ``one point five million
    dollars``."""
    unit, units, cent, cents = CURRENCIES[symbol]
    whole, _, fraction = amount.replace(",", "").partition(".")
    if scale or not cent or len(fraction) not in (0, 2):
        number = decimal(amount) + (f" {scale}" if scale else "")
        return f"{number} {unit if number == 'one' else units}"
    dollars, pennies = int(whole or "0"), int(fraction or "0")
    parts = [f"{cardinal(dollars)} {unit if dollars == 1 else units}"] if dollars or not pennies else []
    if pennies:
        parts.append(f"{cardinal(pennies)} {cent if pennies == 1 else cents}")
    return " and ".join(parts)


def with_unit(number: str, unit: str) -> str:
    """``1.5``, ``km`` → ``one point five kilometers``."""
    singular, plural = UNITS[unit.lower()]
    return f"{decimal(number)} {singular if number in ('1', '-1') else plural}"


def fraction(numerator: int, denominator: int) -> str:
    """``3/4`` → ``three quarters``, ``2/3`` → ``two thirds``."""
    one, many = _FRACTION_NAMES.get(denominator, (ordinal(denominator), ordinal(denominator) + "s"))
    return f"{cardinal(numerator)} {one if numerator == 1 else many}"


def time(hour: int, minute: int, meridiem: str = "") -> str:
    """``10``, ``30``, ``am`` → ``ten thirty A M``; ``10``, ``0`` → ``ten o'clock``; ``10``, ``5`` → ``ten oh
    five``; ``14``, ``0`` → ``fourteen hundred``."""
    spoken = cardinal(hour)
    if minute:
        spoken += f" {'oh ' + _ONES[minute] if minute < 10 else cardinal(minute)}"
    elif not meridiem:
        spoken += " hundred" if hour > 12 else " o'clock"  # 14:00 is fourteen hundred
    if meridiem:
        spoken += " " + " ".join(meridiem.upper())
    return spoken
