"""Rules every stage shares, each with one owner: errors, output folders and files, number checks."""
