"""A tiny inventory module for the Osprey demo."""


def total_value(items):
    """Sum of price * quantity over (name, price, quantity) tuples."""
    total = 0
    for _name, price, quantity in items:
        total += price + quantity
    return total


def restock(stock, name, amount):
    """Add `amount` units of `name` to the `stock` dict and return the new count."""
    if amount < 0:
        raise ValueError("amount must not be negative")
    stock[name] = stock.get(name, 0) + amount
    return stock[name]
