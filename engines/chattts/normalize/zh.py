"""Chinese spoken forms: 读数 (cardinals with 万/亿 groups), decimals, digit strings, money, units, times."""

from __future__ import annotations

__all__ = ["CURRENCIES", "MEASURE_WORDS", "UNITS", "cardinal", "decimal", "digits", "money", "time", "with_unit"]

_DIGITS = "零一二三四五六七八九"
_SMALL_UNITS = ("", "十", "百", "千")
_GROUP_UNITS = ("", "万", "亿", "万亿")
_MAX_CARDINAL = 10**16

#: Currency symbol → its Chinese name; ``¥`` is 元 (renminbi) in Chinese text.
CURRENCIES = {"$": "美元", "€": "欧元", "£": "英镑", "¥": "元"}
#: Unit symbol (lower case) → Chinese name.
UNITS = {
    "km/h": "公里每小时", "mph": "英里每小时", "km": "公里", "m": "米", "cm": "厘米", "mm": "毫米", "mi": "英里",
    "ft": "英尺", "kg": "公斤", "g": "克", "mg": "毫克", "lb": "磅", "lbs": "磅", "oz": "盎司", "l": "升",
    "ml": "毫升", "°c": "摄氏度", "°f": "华氏度", "°": "度", "kb": "千字节", "mb": "兆字节", "gb": "吉字节",
    "tb": "太字节", "mbps": "兆比特每秒", "gbps": "吉比特每秒", "hz": "赫兹", "khz": "千赫", "mhz": "兆赫",
    "ghz": "吉赫", "w": "瓦", "kw": "千瓦", "kwh": "千瓦时", "v": "伏", "ms": "毫秒", "s": "秒", "sec": "秒",
    "min": "分钟", "h": "小时", "hr": "小时", "hrs": "小时",
}  # fmt: skip
#: Measure words after which 2 is read 两 (两个, 两点, 两天), not 二.
MEASURE_WORDS = frozenset("个位只条张本件台辆次天周年岁点种名份双对把块杯瓶碗层间家场首部支颗架")


def _below_10000(n: int) -> str:
    """1024 → 一千零二十四: a 零 stands for each run of missing places inside the number."""
    text = ""
    pending_zero = False
    for place in (3, 2, 1, 0):
        digit = n // 10**place % 10
        if digit == 0:
            pending_zero = bool(text)
            continue
        if pending_zero:
            text += "零"
            pending_zero = False
        text += _DIGITS[digit] + _SMALL_UNITS[place]
    return text


def cardinal(n: int) -> str:
    """``123456`` → ``十二万三千四百五十六``; ``2000`` → ``两千``; past 10^16, digit by digit."""
    if n < 0:
        return "负" + cardinal(-n)
    if n == 0:
        return "零"
    if n >= _MAX_CARDINAL:
        return digits(str(n))
    groups: list[int] = []
    while n:
        n, group = divmod(n, 10000)
        groups.append(group)
    text = ""
    for index in range(len(groups) - 1, -1, -1):
        group = groups[index]
        if not group:
            continue
        if text and group < 1000:  # 一万零五百: the gap to the lower group is spoken
            text += "零"
        text += _below_10000(group) + _GROUP_UNITS[index]
    if text.startswith("一十"):  # 十五, not 一十五
        text = text[1:]
    if text.startswith("二") and text[1:2] in ("千", "万", "亿"):
        text = "两" + text[1:]
    return text


def digits(text: str, one: str = "一") -> str:
    """Digit by digit: ``2025`` → ``二零二五``; phone numbers pass ``one="幺"``."""
    return "".join(one if c == "1" else _DIGITS[int(c)] for c in text if c.isdigit())


def decimal(text: str) -> str:
    """``-12.5`` → ``负十二点五``; ``1,234`` → ``一千二百三十四``."""
    sign = "负" if text.startswith("-") else ""
    whole, _, fraction = text.lstrip("+-").replace(",", "").partition(".")
    spoken = digits(whole) if len(whole) > 1 and whole.startswith("0") else cardinal(int(whole or "0"))
    if fraction:
        spoken += "点" + digits(fraction)
    return sign + spoken


def money(amount: str, symbol: str, scale: str = "") -> str:
    """``19.99``, ``$`` → ``十九点九九美元``; ``1.5``, ``$``, ``亿`` → ``一点五亿美元``."""
    return decimal(amount) + scale + CURRENCIES[symbol]


def with_unit(number: str, unit: str) -> str:
    """``-5``, ``°C`` → ``零下五摄氏度`` (temperatures below zero are 零下); ``3``, ``km`` → ``三公里``."""
    name = UNITS[unit.lower()]
    if number.startswith("-") and name in ("摄氏度", "华氏度", "度"):
        return "零下" + decimal(number[1:]) + name
    return decimal(number) + name


def time(hour: int, minute: int, second: int = 0) -> str:
    """``10``, ``30`` → ``十点三十分``; ``2``, ``5`` → ``两点零五分``; ``10``, ``0`` → ``十点``."""
    spoken = ("两" if hour == 2 else cardinal(hour)) + "点"
    if minute:
        spoken += ("零" if minute < 10 else "") + cardinal(minute) + "分"
    if second:
        spoken += cardinal(second) + "秒"
    return spoken
