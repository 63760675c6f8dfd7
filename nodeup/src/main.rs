fn main() {
    std::process::exit(nodeup::main());
}
