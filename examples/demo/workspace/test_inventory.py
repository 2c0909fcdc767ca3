import unittest

from inventory import restock, total_value


class InventoryTest(unittest.TestCase):
    def test_total_value(self):
        items = [("bolt", 2, 10), ("nut", 1, 5)]
        self.assertEqual(total_value(items), 25)

    def test_restock(self):
        stock = {"bolt": 3}
        self.assertEqual(restock(stock, "bolt", 4), 7)
        self.assertEqual(restock(stock, "nut", 1), 1)

    def test_restock_rejects_negative(self):
        with self.assertRaises(ValueError):
            restock({}, "bolt", -1)


if __name__ == "__main__":
    unittest.main()
