module github.com/shardsplit/shardsplit

go 1.26

require github.com/twmb/murmur3 v1.2.2
