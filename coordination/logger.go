package coordination

import "go.uber.org/zap"

// raftLogger is raft's logger on zap: raft's own messages go at debug
// level but for warnings and errors.
type raftLogger struct{ s *zap.SugaredLogger }

func (l raftLogger) Debug(v ...any)                   { l.s.Debug(v...) }
func (l raftLogger) Debugf(format string, v ...any)   { l.s.Debugf(format, v...) }
func (l raftLogger) Info(v ...any)                    { l.s.Debug(v...) }
func (l raftLogger) Infof(format string, v ...any)    { l.s.Debugf(format, v...) }
func (l raftLogger) Warning(v ...any)                 { l.s.Warn(v...) }
func (l raftLogger) Warningf(format string, v ...any) { l.s.Warnf(format, v...) }
func (l raftLogger) Error(v ...any)                   { l.s.Error(v...) }
func (l raftLogger) Errorf(format string, v ...any)   { l.s.Errorf(format, v...) }
func (l raftLogger) Fatal(v ...any)                   { l.s.Fatal(v...) }
func (l raftLogger) Fatalf(format string, v ...any)   { l.s.Fatalf(format, v...) }
func (l raftLogger) Panic(v ...any)                   { l.s.Panic(v...) }
func (l raftLogger) Panicf(format string, v ...any)   { l.s.Panicf(format, v...) }
