"""Money: credit accounts, holds and once-only charges, and what crawls cost."""
