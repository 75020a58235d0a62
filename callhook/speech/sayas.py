"""SSML's ``say-as``: text interpreted as digits, characters, a number, a telephone number, a
date, a time or an amount of money, written out as the words a voice should say.

Every function takes the element's text and returns words for an engine to read, or the
text as written when it cannot be read as asked (a "date" that is no date is not an
error: the markup was well formed, the engine reads what was written, as Amazon Polly
does). Numbers are spelt by ``num2words`` in the call's language where it has one; dates,
times, telephone numbers and amounts are English (other languages get their digits
spelt or the text as written): what applications written for Aculab Cloud use, whose
``text_to_say`` SSML is Amazon Polly's.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation

from num2words import num2words

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
#: Amounts: a symbol or ISO 4217 code, and its unit and hundredth, singular and plural.
CURRENCIES: dict[str, tuple[str, str, str, str]] = {
    "USD": ("dollar", "dollars", "cent", "cents"),
    "CAD": ("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "AUD": ("Australian dollar", "Australian dollars", "cent", "cents"),
    "NZD": ("New Zealand dollar", "New Zealand dollars", "cent", "cents"),
    "GBP": ("pound", "pounds", "penny", "pence"),
    "EUR": ("euro", "euros", "cent", "cents"),
    "CHF": ("Swiss franc", "Swiss francs", "centime", "centimes"),
    "JPY": ("yen", "yen", "", ""),
    "INR": ("rupee", "rupees", "paisa", "paise"),
}
SYMBOLS = {"$": "USD", "£": "GBP", "€": "EUR", "¥": "JPY", "₹": "INR"}

_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")
_AMOUNT = re.compile(
    r"^(?P<pre>[A-Za-z]{3}|[$£€¥₹])?\s*(?P<n>\d[\d,]*(\.\d+)?)\s*(?P<post>[A-Za-z]{3})?$"
)
_TIME = re.compile(
    r"^(?P<h>\d{1,2})(?::(?P<m>\d{2}))?(?::(?P<s>\d{2}))?\s*(?P<ap>[ap]\.?\s?m\.?)?$", re.I
)


def _language(language: str | None) -> str:
    """num2words' name for a BCP 47 tag (``en-GB`` → ``en``), English when it has none."""
    primary = (language or "en").split("-")[0].lower()
    try:
        num2words(1, lang=primary)
    except NotImplementedError:
        return "en"
    return primary


def _english(language: str | None) -> bool:
    return (language or "en").split("-")[0].lower() == "en"


def digits(text: str, language: str | None = None) -> str:
    """Each digit on its own ("4172" → "four one seven two"); other letters spelt."""
    if not _english(language):
        return " ".join(ch for ch in text if not ch.isspace())
    return " ".join(
        DIGIT_WORDS[int(ch)] if ch.isdigit() else ch.upper() for ch in text if ch.isalnum()
    )


def characters(text: str, language: str | None = None) -> str:
    """Spelt out, letter by letter and digit by digit ("AB12" → "A B one two")."""
    return digits(text, language)


def cardinal(text: str, language: str | None = None) -> str:
    """A number in words ("1,234" → "one thousand, two hundred and thirty-four")."""
    number = _number(text)
    if number is None:
        return text
    # (num2words' commas, "one thousand, two hundred", would be pauses, or split a long
    # sentence there.)
    return str(num2words(number, lang=_language(language))).replace(",", "")


def ordinal(text: str, language: str | None = None) -> str:
    """An ordinal ("21" or "21st" → "twenty-first")."""
    stripped = re.sub(r"(?<=\d)(st|nd|rd|th)$", "", text.strip(), flags=re.I)
    number = _number(stripped)
    if number is None or number != int(number) or number < 0:
        return text
    return str(num2words(int(number), lang=_language(language), to="ordinal"))


def telephone(text: str, language: str | None = None) -> str:
    """Digit by digit, its groups apart ("+44 20 7946-0958" → "plus four four, two zero,
    ..."): the pause between groups is the comma's."""
    if not _english(language):
        return text
    groups = [g for g in re.split(r"[\s().\-/]+", text.strip()) if g]
    if not groups or not all(re.fullmatch(r"\+?[0-9A-Za-z#*]+", g) for g in groups):
        return text
    words = []
    for group in groups:
        said = ("plus " if group.startswith("+") else "") + digits(group.lstrip("+"))
        words.append(said.replace("#", "hash").replace("*", "star"))
    return ", ".join(words)


def date(text: str, format_: str | None = None, language: str | None = None) -> str:
    """A date in the order ``format_`` names (Polly's: ``mdy``, ``dmy``, ``ymd``, ``md``,
    ``dm``, ``ym``, ``my``, ``d``, ``m``, ``y``, ``yyyymmdd``), said as "March fifth, twenty
    twenty-six". Without a format: ``ymd`` when the text starts with a four-digit year,
    else ``mdy``."""
    if not _english(language):
        return text
    stripped = text.strip()
    order = (format_ or "").lower() or ("ymd" if re.match(r"^\d{4}\b", stripped) else "mdy")
    if order == "yyyymmdd":
        if not re.fullmatch(r"\d{8}", stripped):
            return text
        fields = [stripped[:4], stripped[4:6], stripped[6:]]
        order = "ymd"
    else:
        fields = [f for f in re.split(r"[\s/.\-]+", stripped) if f]
    if len(fields) != len(order) or not set(order) <= {"d", "m", "y"}:
        return text
    values = dict(zip(order, fields, strict=True))
    try:
        month = _month(values["m"]) if "m" in values else None
        day = int(values["d"]) if "d" in values else None
        year = int(values["y"]) if "y" in values else None
    except ValueError:
        return text
    if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
        return text
    if year is not None and month is not None and day is not None:
        try:
            datetime.date(year if year > 0 else 2000, month, day)
        except ValueError:
            return text
    said = []
    if month is not None:
        said.append(MONTHS[month - 1])
    if day is not None:
        said.append(
            str(num2words(day, to="ordinal"))
            if month is not None
            else f"the {num2words(day, to='ordinal')}"
        )
    phrase = " ".join(said)
    if year is not None:
        spoken_year = str(num2words(year, to="year"))
        phrase = f"{phrase}, {spoken_year}" if phrase else spoken_year
    return phrase


def _month(field: str) -> int:
    if field.isdigit():
        return int(field)
    for number, name in enumerate(MONTHS, start=1):
        if len(field) >= 3 and name.lower().startswith(field.lower().rstrip(".")):
            return number
    raise ValueError(field)


def time(text: str, language: str | None = None) -> str:
    """A time of day ("10:30" → "ten thirty", "9:05 pm" → "nine oh five p m", "14:00" →
    "fourteen hundred", "7 am" → "seven a m")."""
    if not _english(language):
        return text
    found = _TIME.match(text.strip())
    if found is None:
        return text
    hour, minute = int(found["h"]), int(found["m"] or 0)
    second = int(found["s"] or 0)
    half = found["ap"]
    if minute > 59 or second > 59 or hour > (12 if half else 23):
        return text
    words = [str(num2words(hour))]
    if minute == 0 and not half and found["m"] is not None:
        words.append("hundred" if hour > 12 or hour == 0 else "o'clock")
    elif minute:
        words.append(f"oh {num2words(minute)}" if minute < 10 else str(num2words(minute)))
    if second:
        words.append(f"and {num2words(second)} seconds")
    if half:
        words.append("a m" if half[0].lower() == "a" else "p m")
    return " ".join(words)


def currency(text: str, language: str | None = None) -> str:
    """An amount ("$12.50" → "twelve dollars and fifty cents", "3 GBP" → "three pounds")."""
    found = _AMOUNT.match(text.strip())
    if found is None or not _english(language):
        return text
    code = (found["pre"] or found["post"] or "USD").upper()
    code = SYMBOLS.get(code, code)
    if found["pre"] and found["post"]:
        return text
    try:
        amount = Decimal(found["n"].replace(",", ""))
    except InvalidOperation:
        return text
    whole = int(amount)
    hundredths = int((amount - whole) * 100 + Decimal("0.5")) if amount != whole else 0
    names = CURRENCIES.get(code)
    if names is None:
        return f"{cardinal(found['n'])} {' '.join(code)}"
    one, many, small, smalls = names
    said = f"{num2words(whole)} {one if whole == 1 else many}"
    if hundredths and small:
        said += f" and {num2words(hundredths)} {small if hundredths == 1 else smalls}"
    return said


def _number(text: str) -> int | Decimal | None:
    stripped = text.strip()
    if not _NUMBER.match(stripped):
        return None
    value = Decimal(stripped.replace(",", ""))
    return int(value) if value == int(value) and "." not in stripped else value
