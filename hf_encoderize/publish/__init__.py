"""What leaves the machine: the model card, the Hub push and the Gradio Space (its app ships as package data)."""
