"""A small stock ledger for a shop: items, moves between bins, and a command line over it."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


class LedgerError(Exception):
    """A move the ledger refuses: an unknown item, a bin that would go negative."""


@dataclass
class Item:
    sku: str
    name: str
    price_cents: int
    bins: dict[str, int] = field(default_factory=dict)

    def total(self) -> int:
        """How many of this item the shop holds, over all its bins."""
        return sum(self.bins.values())

    def value_cents(self) -> int:
        return self.total() * self.price_cents


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: dict[str, Item] = {}
        if path.exists():
            self.load()

    def load(self) -> None:
        raw = json.loads(self.path.read_text(encoding="utf-8"))
        for entry in raw["items"]:
            item = Item(entry["sku"], entry["name"], entry["price_cents"], dict(entry.get("bins", {})))
            self.items[item.sku] = item

    def save(self) -> None:
        entries = [
            {"sku": item.sku, "name": item.name, "price_cents": item.price_cents, "bins": item.bins}
            for item in sorted(self.items.values(), key=lambda item: item.sku)
        ]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"items": entries}, indent=2), encoding="utf-8")
        tmp.replace(self.path)

    def get(self, sku: str) -> Item:
        try:
            return self.items[sku]
        except KeyError:
            raise LedgerError(f"unknown item {sku!r}") from None

    def add_item(self, sku: str, name: str, price_cents: int) -> Item:
        if sku in self.items:
            raise LedgerError(f"item {sku!r} exists already")
        if price_cents < 0:
            raise LedgerError(f"a price cannot be negative: {price_cents}")
        item = Item(sku, name, price_cents)
        self.items[sku] = item
        return item

    def receive(self, sku: str, bin_name: str, count: int) -> None:
        """Goods arrive: `count` more of `sku` in `bin_name`."""
        if count <= 0:
            raise LedgerError(f"receive a positive count, not {count}")
        item = self.get(sku)
        item.bins[bin_name] = item.bins.get(bin_name, 0) + count

    def ship(self, sku: str, bin_name: str, count: int) -> None:
        """Goods leave: `count` fewer of `sku` in `bin_name`, never below zero."""
        if count <= 0:
            raise LedgerError(f"ship a positive count, not {count}")
        item = self.get(sku)
        held = item.bins.get(bin_name, 0)
        if held < count:
            raise LedgerError(f"bin {bin_name!r} holds {held} of {sku!r}, not {count}")
        item.bins[bin_name] = held - count
        if item.bins[bin_name] == 0:
            del item.bins[bin_name]

    def move(self, sku: str, source: str, target: str, count: int) -> None:
        """Carry `count` of `sku` from one bin to another: a ship and a receive that happen together."""
        self.ship(sku, source, count)
        self.receive(sku, target, count)

    def low_stock(self, threshold: int) -> list[Item]:
        """Items whose total is under `threshold`, fewest first."""
        low = [item for item in self.items.values() if item.total() < threshold]
        return sorted(low, key=lambda item: (item.total(), item.sku))

    def report(self) -> str:
        lines = [f"{'sku':10} {'name':24} {'count':>6} {'value':>10}"]
        for item in sorted(self.items.values(), key=lambda item: item.sku):
            value = item.value_cents() / 100
            lines.append(f"{item.sku:10} {item.name:24} {item.total():>6} {value:>10.2f}")
        return "\n".join(lines)


def cmd_add(ledger: Ledger, args: list[str]) -> str:
    sku, name, price = args
    ledger.add_item(sku, name, int(price))
    return f"added {sku}"


def cmd_receive(ledger: Ledger, args: list[str]) -> str:
    sku, bin_name, count = args
    ledger.receive(sku, bin_name, int(count))
    return f"received {count} of {sku} in {bin_name}"


def cmd_ship(ledger: Ledger, args: list[str]) -> str:
    sku, bin_name, count = args
    ledger.ship(sku, bin_name, int(count))
    return f"shipped {count} of {sku} from {bin_name}"


def cmd_move(ledger: Ledger, args: list[str]) -> str:
    sku, source, target, count = args
    ledger.move(sku, source, target, int(count))
    return f"moved {count} of {sku} from {source} to {target}"


def cmd_report(ledger: Ledger, args: list[str]) -> str:
    return ledger.report()


COMMANDS = {
    "add": cmd_add,
    "receive": cmd_receive,
    "ship": cmd_ship,
    "move": cmd_move,
    "report": cmd_report,
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in COMMANDS:
        print(f"usage: inventory.py LEDGER {{{','.join(COMMANDS)}}} ARGS...", file=sys.stderr)
        return 2
    ledger = Ledger(Path(argv[0]))
    try:
        print(COMMANDS[argv[1]](ledger, argv[2:]))
    except (LedgerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ledger.save()
    return 0


def test_receive_then_ship(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.add_item("A1", "bolt", 15)
    ledger.receive("A1", "shelf", 10)
    ledger.ship("A1", "shelf", 4)
    assert ledger.get("A1").bins == {"shelf": 6}


def test_ship_more_than_held(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.add_item("A1", "bolt", 15)
    ledger.receive("A1", "shelf", 3)
    try:
        ledger.ship("A1", "shelf", 4)
    except LedgerError as exc:
        assert "holds 3" in str(exc)
    else:
        raise AssertionError("shipped more than the bin held")


def test_move_empties_the_source_bin(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.add_item("A1", "bolt", 15)
    ledger.receive("A1", "shelf", 5)
    ledger.move("A1", "shelf", "back", 5)
    assert ledger.get("A1").bins == {"back": 5}


def test_save_and_load(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.add_item("B2", "nut", 5)
    ledger.receive("B2", "drawer", 40)
    ledger.save()
    again = Ledger(tmp_path / "ledger.json")
    assert again.get("B2").total() == 40


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
