fn main() {
    std::process::exit(localcloud::cli::main());
}
