// ember CLI entry point (placeholder until subcommands land).
int main() { return 0; }
