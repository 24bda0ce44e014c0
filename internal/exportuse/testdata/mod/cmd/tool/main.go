// Command tool is code too.
package main

import "example.com/mod/lib"

func main() { println(lib.InMain) }
