fn main() {
    std::process::exit(ballast::run());
}
