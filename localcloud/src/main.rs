fn main() {
    std::process::exit(localcloud::run());
}
