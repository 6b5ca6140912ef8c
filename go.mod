module github.com/shardsplit/shardsplit

go 1.26

require github.com/twmb/murmur3 v1.2.2

require (
	github.com/google/go-cmp v0.7.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
